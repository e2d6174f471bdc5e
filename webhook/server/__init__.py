"""The HTTP adapter: Flask routes, TLS with certificate reload, and the gunicorn application."""
