"""The ground floor: the clocks, fault points, the event-loop watch and the caller value
every floor above may use; it imports nothing of the broker's."""
