DROP TABLE nodes;
DROP TABLE admin_sessions;
ALTER TABLE users DROP COLUMN is_admin;
