"""One module per planner; ``hulk_planner.api.plan`` is the facade that picks one."""
