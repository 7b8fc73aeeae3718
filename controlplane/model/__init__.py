"""The values the control plane stores and exchanges, with their validation: a service's
spec as EAS writes it, errors, page tokens, roles, cron schedules, and the states the store
and the reconciler share. Pure: imports nothing of the control plane outside this wing."""
