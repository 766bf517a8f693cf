"""Controller-side code shared by the collection's plugins (plain Python, unit-tested without ansible-core)."""
