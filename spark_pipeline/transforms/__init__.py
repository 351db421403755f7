"""Pure ``DataFrame -> DataFrame`` transforms, one module per family of tables.

Each takes the parsed ``events`` frame (or frames derived from it) and returns a table;
none reads files, writes, collects or touches the session config.
"""

from __future__ import annotations
