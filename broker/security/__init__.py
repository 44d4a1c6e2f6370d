"""Authentication, principals and authorization."""
