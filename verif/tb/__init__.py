"""Testbench parts that any test may import: the core's harness in the Amaranth simulator."""
