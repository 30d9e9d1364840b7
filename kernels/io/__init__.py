"""Reading and writing graphs: text tokenising, the parallel METIS and ``.comm``
parsers that build CSR directly, integer formatting for the writers, and the
validation of CSR arrays read from binary files (all CPU: reading is host work)."""
