"""The console: the web pages of the people in the loop, served by ``clingate console``.

* :mod:`~streams.console.users`: users, roles, scrypt password hashes, the users file.
"""
