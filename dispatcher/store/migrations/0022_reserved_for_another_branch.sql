-- Placeholder (branch portal only): 0022 belongs to another branch of issue 26, merged
-- separately. The lead deletes this file at the merge, keeping that branch's 0022.
SELECT 1;
