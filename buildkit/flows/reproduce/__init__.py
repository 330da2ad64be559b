"""`buildkit reproduce`: a recorded build read back, rebuilt with exactly its inputs, its digest compared."""
