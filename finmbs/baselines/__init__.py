"""Baselines on the same seeds and accounting: direct seed synthesis (appendix C); corpus filtering is
`finmbs.mbs.calibrate` applied to an existing problem set."""
