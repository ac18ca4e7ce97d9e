"""``clingate worker``: the Faust app with the DBPM memory and clinical agents, and the DBPM gate loop."""
