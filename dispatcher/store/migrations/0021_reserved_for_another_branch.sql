-- Placeholder (branch portal only): 0021 belongs to another branch of issue 26, merged
-- separately. The lead deletes this file at the merge, keeping that branch's 0021.
SELECT 1;
