"""What every server process does as it starts, below both servers (``controlplane`` and
``gateway`` import it; it imports neither): its start-up heap frozen out of the collector's
full passes (:mod:`.heap`), and the settings part of its ``--help`` (:mod:`.helptext`).
"""
