"""The bottom floor: errors, exit statuses, the plug-in registry, safe writes, the console and its tables.
Imports nothing of runner above it."""
