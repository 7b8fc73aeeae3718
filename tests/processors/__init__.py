"""Tests of processors/: registry, storage, triton."""
