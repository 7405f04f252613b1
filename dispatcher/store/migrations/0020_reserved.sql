-- Schema 20: reserved for another branch of issue 25 (the migrations run without a gap). A
-- placeholder on branch `mtls` only: dropped when the branch that owns 0020 is merged.
SELECT 1;
