"""Thread phases shared by the runtime's modules."""

NEW, TOUCH, WORK, DEAD = 0, 1, 2, 3  # not started, touching its memory at start-up, working, dead
