"""Generated differential testing: random sequences of raw exactly-once requests, drawn from a
small model of the world they act on (`model.py`), turned into the suite's steps (`actions.py`)
and sent to Apache Kafka and to Gregor in lock-step (`play.py`: answers compared step by step,
a differing sequence shrunk to the shortest that still differs and written as a case file,
coverage counted). `python -m tests.differential.generated fuzz|replay` runs it on its own
brokers; tests/differential/test_generated.py runs a fixed seed inside the suite."""
