"""What every stage shares: exception types, paths, deadlines, the file lock, URL credentials, progress output."""
