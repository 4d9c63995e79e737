"""OPC UA source: session and trust, reads, subscription events and the poller."""
