"""Tests of moonish.service: pipeline files, the supervisor, moonish run."""
