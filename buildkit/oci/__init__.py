"""OCI images as content: references, credentials, the registry client, layouts, diffs, root file systems."""
