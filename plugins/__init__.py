"""Built-in plugins, registered through entry points exactly as a third-party package would."""
