"""Side-by-side speed measurements. Not tests: they assert nothing about speed."""
