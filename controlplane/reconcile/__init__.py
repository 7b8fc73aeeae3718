"""The reconciler: desired state and status as pure functions of stored and observed state,
the resync's drift comparison, and the loop that applies them through a runtime. Above the
store, the runtime and elasticity (it runs the autoscalers while it leads)."""
