"""What a case is: its fields, its tensors, a case read from a string or a file, and sampling plans (structure)."""
