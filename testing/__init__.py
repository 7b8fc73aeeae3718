"""Protocol stand-ins (OSS, the Kubernetes API) that unmodified client libraries talk to over
real HTTP; used by the tests and the benchmarks, and importable without the test package."""
