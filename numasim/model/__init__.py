"""What is simulated: machine, workload and scenario specs, frozen and validated at the edge."""
