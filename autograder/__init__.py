"""The Part II grading harness: release, collect, grade, feedback, export, check, demo."""
