"""Storage engines for the metadata store: the interface, LMDB, and an in-memory twin."""
