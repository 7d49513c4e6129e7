"""Differential mode: the matrix cells against amqpq and the reference RabbitMQ, compared.

``compare.diff`` lists every difference between two observations, ``allow_list`` says which
differences are accepted (with a reason), ``report.Report`` collects every cell and writes the
report (JSON + text) under the pytest tmp dir.
"""
