"""realsim/robots/rc_car."""
