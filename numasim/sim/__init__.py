"""The runtime: the simulation engine on a simpy.Environment, one mechanism per module."""
