"""A trainer module that fails at import time (tests of ldp_audit.report._sections)."""

raise RuntimeError("this sections module is broken at import time")
