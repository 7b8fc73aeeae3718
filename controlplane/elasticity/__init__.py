"""Replicas that follow load: the autoscaler's pure decision and its loop, the signals it
reads (gateway load reports, Triton's queue time, async queue backlogs), cron scaling and
cold-start breakdowns. Writes through the store and observes through a runtime; never
imports the reconciler or the API."""
