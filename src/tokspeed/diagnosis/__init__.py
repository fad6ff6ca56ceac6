"""Rules over records and telemetry: is the measurement valid, and why is it slow?"""
