"""What the node cache's server (:mod:`processors.model_cache.server`) and the pull's client
(:mod:`processors.storage.node_cache`) agree on: their headers and the token's variable.

Apart from the server so that a pull, which only ever talks to it, does not import an HTTP
server (``http.server``, ``socketserver``: a few ms of every pull process's start).
"""

CRC_HEADER = "X-Openeas-Crc64"
ETAG_HEADER = "X-Openeas-Etag"
TOKEN_ENV = "OPENEAS_MODEL_CACHE_TOKEN"
