"""HTTP routes, one module per resource. Handlers stay thin: the work is in app.job_queue / app.analyses."""
