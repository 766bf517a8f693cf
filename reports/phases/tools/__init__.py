"""The tools step (probes/tools, roles/tools): what each node had, what was installed or built, what is missing."""
