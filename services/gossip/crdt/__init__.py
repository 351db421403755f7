"""Convergent replicated data types for the metadata store: version vectors, dotted
version vector sets and the last-writer-wins resolver. Pure modules: no I/O, no clock."""
