"""The tenancy as the log has it: its records (``model``), the rules of administrators'
commands (``admin``), of virtual folders (``vfolders``) and of resource groups (``groups``).

Pure functions of the tenancy alone: they know nothing of the cluster's fold.
"""
