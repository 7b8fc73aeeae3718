"""The contract every part shares and nothing below it: the route-table wire types (control plane
-> gateway), the EAS service-config file format (eascmd, `openeas manifests`) and RFC 7386 merge
patch. Imports only the standard library and pydantic."""
