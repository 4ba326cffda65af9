"""The control plane in Redis: run registry, fencing lease, status and heartbeats; progress
lines; where Redis is (the URL a run uses, and the project-local server)."""
