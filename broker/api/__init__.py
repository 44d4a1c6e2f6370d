"""What handlers and coordinators are handed: the ports (services.py) and the request context."""
