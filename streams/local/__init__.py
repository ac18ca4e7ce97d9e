"""What ``clingate`` runs on this machine: the local Kafka broker and cluster, their jars and container
images, child processes, how a command finds its cluster and checks the folders it writes in."""
