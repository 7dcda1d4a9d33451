"""The published book: its build, pages, tables, figures, report, static assets and downloads.

May import everything but `cli`; nothing but `cli` imports it.
"""
