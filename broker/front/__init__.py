"""The client-facing edge: the listeners' sockets and the connection loop that reads
requests, hands them to the handler table and writes the answers in order."""
