"""The OpenEnv side: the app, the Environment, the Task API's routes, metadata."""
