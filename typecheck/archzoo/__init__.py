"""mypy's view of the installed layout (pyproject.toml's [tool.mypy] mypy_path).

The components' folders install as archzoo.actors, archzoo.learners, archzoo.replay and
archzoo.paramserver (package-dir). setuptools' editable install maps them with an import
hook, which mypy does not run, so mypy finds them here: each is a link to its folder. The
real archzoo package is the one in the repository root; this file only makes the folder a
package for mypy's search and is never imported.
"""
