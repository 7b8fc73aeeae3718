"""The contract every part shares and nothing below it: the route-table wire types (control plane
-> gateway), the EAS service-config file format (eascmd, `openeas manifests`), RFC 7386 merge
patch, and the start-up heap freeze every server process makes (`heap.py`). Imports only the
standard library and pydantic."""
