!> A model-like producer: archives 3 steps x 3 parameters x 4 pressure levels of a real(4)
!> field through libhaar, flushing after each step (what a forecast model does as it computes),
!> then lists and retrieves one field back and checks it, and shows that bad input (a bad key,
!> a missing field, an unknown configuration) gives a nonzero status and a message.
!>
!> usage: producer CONFIG.yaml [GRIB_FILE]
!>   prints "producer: ok" and exits 0 when every check holds; with GRIB_FILE (one message with
!>   MARS keys, e.g. ecCodes' gg_sfc_grib2.tmpl), also archives it keyed by ecCodes.
program producer
  use haar
  use, intrinsic :: iso_c_binding, only: c_char
  implicit none
  integer, parameter :: npoints = 10000
  integer, parameter :: params(3) = [130, 131, 132]
  integer, parameter :: levels(4) = [1000, 850, 500, 250]
  character(len=*), parameter :: base = &
       "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=pl"
  type(haar_store) :: store, bad
  real(4), allocatable :: field(:), back(:)
  character(len=512) :: config, key, grib_path
  character(kind=c_char), allocatable :: grib(:)
  integer :: status, step, ip, il, n, count, failures, unit, grib_size

  failures = 0
  call get_command_argument(1, config)
  status = haar_open(store, trim(config))
  call check(status == HAAR_OK, "open " // trim(config))
  allocate(field(npoints), back(npoints))

  do step = 0, 2
     do ip = 1, size(params)
        do il = 1, size(levels)
           call compute(field, step, params(ip), levels(il))
           write(key, '(a,",levelist=",i0,",step=",i0,",param=",i0)') base, levels(il), step, &
                params(ip)
           status = haar_archive_real32(store, key, field)
           call check(status == HAAR_OK, "archive " // trim(key))
        end do
     end do
     status = haar_flush(store)
     call check(status == HAAR_OK, "flush")
  end do

  status = haar_list_count(store, "class=od,expver=1,date=20261121", count)
  call check(status == HAAR_OK .and. count == 36, "36 fields listed")

  ! GRIB bytes, keyed by ecCodes inside libhaar.
  if (command_argument_count() >= 2) then
     call get_command_argument(2, grib_path)
     open(newunit=unit, file=trim(grib_path), access="stream", form="unformatted", &
          status="old", action="read")
     inquire(unit=unit, size=grib_size)
     allocate(grib(grib_size))
     read(unit) grib
     close(unit)
     status = haar_archive_grib(store, grib, n)
     call check(status == HAAR_OK .and. n == 1, "archive GRIB " // trim(grib_path))
     status = haar_flush(store)
     status = haar_list_count(store, "class=od,date=20070424,param=130", count)
     call check(status == HAAR_OK .and. count == 1, "the GRIB field is listed by its MARS keys")
     status = haar_archive_grib(store, grib(1:grib_size / 2), n)
     call check(status == HAAR_ERR_INPUT .and. n == 0, "a truncated GRIB message is refused")
     call check(index(haar_error_message(), "nothing archived") > 0, haar_error_message())
  end if

  ! One field back: step 1, param 131, level 500.
  write(key, '(a,",levelist=500,step=1,param=131")') base
  back = 0
  status = haar_retrieve_real32(store, key, back, n)
  call compute(field, 1, 131, 500)
  call check(status == HAAR_OK .and. n == npoints, "retrieve " // trim(key))
  call check(all(transfer(back, [0]) == transfer(field, [0])), "the values round trip, bit for bit")

  ! Step 2 is complete: a wait returns at once with the 12 fields it names.
  status = haar_wait(store, base // ",levelist=1000/850/500/250,step=2,param=130/131/132", &
       5d0, n)
  call check(status == HAAR_OK .and. n == 12, "wait for step 2")

  ! Bad input: each a nonzero status and a message, never a crash.
  status = haar_archive_real32(store, "class=od,expver=1", field)
  call check(status == HAAR_ERR_INPUT, "a bad key is refused")
  call check(index(haar_error_message(), "class=od,expver=1") > 0, &
       "the message names the key: " // haar_error_message())
  write(key, '(a,",levelist=500,step=7,param=131")') base
  status = haar_retrieve_real32(store, key, back, n)
  call check(status == HAAR_ERR_MISSING, "a missing field is an error")
  call check(index(haar_error_message(), "step=7") > 0, "it names the key: " // haar_error_message())
  status = haar_retrieve_real32(store, base // ",levelist=500,step=1,param=131/132", back, n)
  call check(status == HAAR_ERR_INPUT, "two fields do not fit one field's array")
  call check(index(haar_error_message(), "more bytes") > 0, haar_error_message())
  status = haar_open(bad, "/nonexistent/haar.yaml")
  call check(status == HAAR_ERR_INPUT, "an unknown configuration is refused")
  call check(index(haar_error_message(), "/nonexistent/haar.yaml") > 0, haar_error_message())
  status = haar_flush(bad)
  call check(status == HAAR_ERR_INPUT, "a store that did not open is a NULL handle")

  ! Nothing flushed was lost.
  status = haar_list_count(store, "class=od,expver=1,date=20261121", count)
  call check(status == HAAR_OK .and. count == 36, "still 36 fields")
  status = haar_close(store)
  call check(status == HAAR_OK, "close")

  if (failures > 0) then
     print '(i0," check(s) failed")', failures
     error stop 1
  end if
  print '(a)', "producer: ok (libhaar " // haar_version() // ")"

contains

  !> The "model": a field that depends on the step, parameter and level.
  subroutine compute(f, step, param, level)
    real(4), intent(out) :: f(:)
    integer, intent(in) :: step, param, level
    integer :: i
    do i = 1, size(f)
       f(i) = real(param) + real(level) * 0.001 + real(step) * 0.25 + sin(real(i) * 0.01)
    end do
  end subroutine compute

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
       print '("check failed: ",a," (status ",i0,": ",a,")")', what, status, haar_error_message()
       failures = failures + 1
    end if
  end subroutine check

end program producer
