"""What every stage shares: exception types, paths, deadlines, progress output."""
