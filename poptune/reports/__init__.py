"""Reports and jobs (floor 8): what a user reads and deploys from stored results.

- ``study_report``: what a study tells its user (``StudyReport``: the command's text, the Markdown summary, the
  plot); ``prompts_lines``: a prompts study's lines of it; ``certification``: the certification's lines.
- ``leaderboard``: the leaderboards of every stored study; ``gridtable``, ``tunertable``: the grid table and the
  tuner table.
- ``export``: the deployable configuration of a study (and the file its K/V source carries).

Each module is imported by what needs it; this package imports nothing.
"""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = [
    "certification", "export", "gridtable", "leaderboard", "naming", "prompts_lines", "study_report", "tunertable"
]
