"""The topic catalog: every topic clingate reads or writes, declared once."""
