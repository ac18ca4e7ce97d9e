"""What tests, benchmarks and the demo share to drive clingate from outside."""
