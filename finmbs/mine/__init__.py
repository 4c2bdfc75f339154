"""`finmbs seeds mine`: hard, verified seed questions mined from an ingested corpus.

passages.py picks the passages worth asking about (a cheap score, no model call); questions.py has
the teacher write questions over them and keeps only those that pass every check; run.py is the
resumable run over the documents (lock, done markers, metrics, the seeds file).
"""
