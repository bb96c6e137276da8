-- The rows removed by up.sql named files nothing could land; there is nothing to restore.
SELECT 1;
