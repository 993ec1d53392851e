"""The tables: many subjects × many releases. The release matrix (``matrix``), the compatibility table since EAGLE-3
and its trainer-release grid (``compatibility``, ``trainer_compatibility``, their shared ``cells``), the nightly run
over new releases (``nightly``) and the acceptance study (``acceptance_study``)."""
